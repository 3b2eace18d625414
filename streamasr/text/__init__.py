"""Tokens and text: token tables, prefixes, printable text, words and subtitle cues."""
