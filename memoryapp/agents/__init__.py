"""Agents and their keys: who may write, and how far their writes are trusted."""
