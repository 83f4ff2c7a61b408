"""Hostile strings the report fixture carries through the real pipeline (shared by the tests)."""

HOSTILE_ID = "<script>alert('id')</script>"
HOSTILE_GROUP = "<b onmouseover=alert(1)>bold</b>"
HOSTILE_TOKEN = "<script>alert('token')</script>"

TEXTS = [
    "Hello there, how are you?",
    "Write a short poem about rain.",
    "Explain why the sky is blue.",
    "List three fruits.",
    "Name a colour you like.",
    "What is two plus two?",
]
