"""The phone scenario's seed database: the contacts, messages, reminders, food-platform accounts and merchants every
ACEBench phone entry starts from (its agent category's data; a task's initial configuration only sets the device flags).
Scores are comparable with ACEBench only if these records are its own, so they are kept exactly as ACEBench defines them."""

from __future__ import annotations

from typing import Any

CONTACTS: dict[str, Any] = {'Eve': {'user_id': 'USR100', 'phone_number': '123-456-7890', 'occupation': 'Software Engineer'},
 'Frank': {'user_id': 'USR101', 'phone_number': '234-567-8901', 'occupation': 'Data Scientist'},
 'Grace': {'user_id': 'USR102', 'phone_number': '345-678-9012', 'occupation': 'Product Manager'},
 'Helen': {'user_id': 'USR103', 'phone_number': '456-789-0123', 'occupation': 'UX Designer'},
 'Isaac': {'user_id': 'USR104', 'phone_number': '567-890-1234', 'occupation': 'DevOps Engineer'},
 'Jack': {'user_id': 'USR105', 'phone_number': '678-901-2345', 'occupation': 'Marketing Specialist'}}

INBOX: dict[str, Any] = {'1': {'sender_id': 'USR100',
       'receiver_id': 'USR101',
       'message': "Hey Frank, don't forget about our meeting on 2024-06-11 at 4 PM in Conference Room 1.",
       'time': '2024-06-09'},
 '2': {'sender_id': 'USR101',
       'receiver_id': 'USR102',
       'message': 'Can you help me order a "Margherita Pizza" delivery? The merchant is Domino\'s.',
       'time': '2024-03-09'},
 '3': {'sender_id': 'USR102',
       'receiver_id': 'USR103',
       'message': 'Please check the milk tea delivery options available from Heytea and purchase a cheaper milk tea '
                  'for me. After making the purchase, remember to reply to me with "Already bought."',
       'time': '2023-12-05'},
 '4': {'sender_id': 'USR103',
       'receiver_id': 'USR102',
       'message': 'No problem Helen, I can assist you.',
       'time': '2024-09-09'},
 '5': {'sender_id': 'USR104',
       'receiver_id': 'USR105',
       'message': 'Isaac, are you available for a call?',
       'time': '2024-06-06'},
 '6': {'sender_id': 'USR105',
       'receiver_id': 'USR104',
       'message': "Yes Jack, let's do it in 30 minutes.",
       'time': '2024-01-15'}}

REMINDERS: dict[str, Any] = {'1': {'reminder_id': 1001,
       'title': "Doctor's Appointment",
       'description': 'Visit Dr. Smith for a checkup.',
       'time': '2024-07-15 09:30',
       'notified': False},
 '2': {'reminder_id': 1002,
       'title': 'Team Meeting',
       'description': 'Monthly project review with the team.',
       'time': '2024-07-17 11:00',
       'notified': False},
 '3': {'reminder_id': 1003,
       'title': 'To-do list',
       'description': 'First, help Frank place a food delivery order at "Hema Fresh," ordering two "Fresh Gift '
                      'Packs." Then, send a message to Frank saying, "The price of the purchased goods is () yuan." '
                      'Replace the parentheses with the actual amount, keeping one decimal place.',
       'time': '2024-07-16 11:00',
       'notified': False}}

FOOD_USERS: dict[str, Any] = {'Eve': {'user_id': 'U100', 'password': 'password123', 'balance': 500.0},
 'Frank': {'user_id': 'U101', 'password': 'password456', 'balance': 300.0},
 'Grace': {'user_id': 'U102', 'password': 'password789', 'balance': 150.0},
 'Helen': {'user_id': 'U103', 'password': 'password321', 'balance': 800.0},
 'Isaac': {'user_id': 'U104', 'password': 'password654', 'balance': 400.0},
 'Jack': {'user_id': 'U105', 'password': 'password654', 'balance': 120.0}}

MERCHANTS: dict[str, Any] = {"Domino's": {'merchant_id': 'M100',
              'service_type': 'Pizza',
              'menu': [{'product': 'Margherita Pizza', 'price': 68.0},
                       {'product': 'Super Supreme Pizza', 'price': 88.0}]},
 'Rice Village Bibimbap': {'merchant_id': 'M101',
                           'service_type': 'Bibimbap',
                           'menu': [{'product': 'Stone Pot Bibimbap', 'price': 35.0},
                                    {'product': 'Korean Beef Bibimbap', 'price': 45.0}]},
 'Haidilao': {'merchant_id': 'M102',
              'service_type': 'Hotpot',
              'menu': [{'product': 'Beef Rolls', 'price': 68.0}, {'product': 'Seafood Platter', 'price': 88.0}]},
 'Heytea': {'merchant_id': 'M103',
            'service_type': 'Milk Tea',
            'menu': [{'product': 'Cheese Milk Tea', 'price': 25.0},
                     {'product': 'Four Seasons Spring Milk Tea', 'price': 22.0}]},
 'Hema Fresh': {'merchant_id': 'M104',
                'service_type': 'Fresh Grocery',
                'menu': [{'product': 'Organic Vegetable Pack', 'price': 15.0},
                         {'product': 'Fresh Gift Pack', 'price': 99.0}]},
 'Jiutian BBQ': {'merchant_id': 'M105',
                 'service_type': 'BBQ',
                 'menu': [{'product': 'Korean Grilled Beef', 'price': 128.0},
                          {'product': 'Grilled Pork Belly', 'price': 78.0}]}}

MESSAGE_CAPACITY = 6  # an inbox this full refuses new messages
REMINDER_CAPACITY = 6
