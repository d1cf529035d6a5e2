"""The travel scenario's seed database: the three users, eleven flights and four reservations every ACEBench travel
entry starts from (its Travel class builds them and its entries configure nothing else). Scores are comparable with
ACEBench only if these records are its own, so they are transcribed as data, exactly as ACEBench defines them: a
flight number may appear twice (a booking takes the first), and reservation res_4 names a flight (MU2616) that no
flight record has, as in ACEBench."""

from __future__ import annotations

from typing import Any

USERS: dict[str, Any] = {
    "user1": {"user_name": "Eve", "password": "password123", "cash_balance": 2000.0, "bank_balance": 50000.0, "membership_level": "regular"},
    "user2": {"user_name": "Frank", "password": "password456", "cash_balance": 8000.0, "bank_balance": 8000.0, "membership_level": "silver"},
    "user3": {"user_name": "Grace", "password": "password789", "cash_balance": 1000.0, "bank_balance": 5000.0, "membership_level": "gold"},
}

_FLIGHT_FIELDS = ("flight_no", "origin", "destination", "depart_time", "arrival_time", "status", "seats_available", "economy_price", "business_price")
FLIGHTS: list[dict[str, Any]] = [dict(zip(_FLIGHT_FIELDS, row)) for row in (
    ("CA1234", "Beijing", "Shanghai", "2024-07-15 08:00:00", "2024-07-15 10:30:00", "available", 5, 1200, 3000),
    ("MU5678", "Shanghai", "Beijing", "2024-07-16 09:00:00", "2024-07-16 11:30:00", "available", 3, 1900, 3000),
    ("CZ4321", "Shanghai", "Beijing", "2024-07-16 20:00:00", "2024-07-16 22:00:00", "available", 8, 2500, 4000),
    ("CZ4352", "Shanghai", "Beijing", "2024-07-17 20:00:00", "2024-07-17 22:00:00", "available", 8, 1600, 2500),
    ("MU3561", "Beijing", "Nanjing", "2024-07-18 08:00:00", "2024-07-18 10:00:00", "available", 8, 1500, 4000),
    ("MU1566", "Beijing", "Nanjing", "2024-07-18 20:00:00", "2024-07-18 22:00:00", "available", 8, 1500, 4000),
    ("CZ1765", "Nanjing", "Shenzhen", "2024-07-17 20:30:00", "2024-07-17 22:00:00", "available", 8, 1500, 2500),
    ("CZ1765", "Nanjing", "Shenzhen", "2024-07-18 12:30:00", "2024-07-18 15:00:00", "available", 8, 1500, 2500),
    ("MH1765", "Xiamen", "Chengdu", "2024-07-17 12:30:00", "2024-07-17 15:00:00", "available", 8, 1500, 2500),
    ("MH2616", "Chengdu", "Xiamen", "2024-07-18 18:30:00", "2024-07-18 21:00:00", "available", 8, 1500, 2500),
    ("MH2616", "Chengdu", "Fuzhou", "2024-07-16 18:30:00", "2024-07-16 21:00:00", "available", 8, 1500, 2500),
)]

_RESERVATION_FIELDS = ("reservation_id", "user_id", "flight_no", "payment_method", "cabin", "baggage", "origin", "destination")
RESERVATIONS: list[dict[str, Any]] = [dict(zip(_RESERVATION_FIELDS, row)) for row in (
    ("res_1", "user1", "CA1234", "bank", "Economy Class", 1, "Beijing", "Shanghai"),
    ("res_2", "user1", "MU5678", "bank", "Business Class", 1, "Shanghai", "Beijing"),
    ("res_3", "user2", "MH1765", "bank", "Business Class", 1, "Xiamen", "Chengdu"),
    ("res_4", "user2", "MU2616", "bank", "Business Class", 1, "Chengdu", "Xiamen"),
)]

# free checked bags by membership level and cabin; each further bag costs BAG_FEE yuan
FREE_BAGS: dict[str, dict[str, int]] = {
    "regular": {"Economy Class": 1, "Business Class": 2},
    "silver": {"Economy Class": 2, "Business Class": 3},
    "gold": {"Economy Class": 3, "Business Class": 3},
}
BAG_FEE = 50
NOW = "2024-07-14 06:00:00"  # the clock cancellations are judged by (ACEBench's prompt tells the agent 2024-07-15 08:00)
