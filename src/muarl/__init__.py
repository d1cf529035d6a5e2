"""muarl: train tool-using LLM agents with RL while a simulated user talks to them (MUA-RL)."""

__version__ = "0.1.0"
