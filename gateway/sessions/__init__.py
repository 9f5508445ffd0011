"""The session API (server-side agent loop): its HTTP routes (``api``), its live event streams
(``streams``: WebSocket and SSE), and the session operations every API uses (``ops``)."""
