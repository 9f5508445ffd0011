"""Anthropic Messages (``api``): request bodies (``bodies``), the request as a oneshot session
(``plan``), session events -> Messages stream events (``format``, a translator), Anthropic's
error shape (``errors``)."""
