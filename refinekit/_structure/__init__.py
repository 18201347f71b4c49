"""Structured replies: parsing, repair, diagnosis, templates, corrections, grounding.

What a reply is read as, what can be fixed without a call, what a failed reply did wrong, the
instance template and the correction turn's text, values checked against a source, and the
constrained-decoding formats of each server. Imports `_core` only.
"""
