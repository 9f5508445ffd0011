"""The shared runtime every turnstream process uses (gateway and workers alike): the Redis
Streams bus, the session record, the turn barrier, KV-aware routing and the configuration.

Stages meet here and in ``schemas/``, never by importing each other.
"""
