"""Webhooks: signing and safe targets. (The outbox and dispatcher are not built yet.)"""
