"""Presenting estimates: rich tables for people, JSON for programs."""
