"""OpenAI Responses (``api``): request bodies (``body``) and input items (``items``), the request
as a session (``plan``, ``server_tools`` for mcp tools), session events -> response events
(``format``, a translator, over ``output``'s items), relaying a response (``run``), stored
responses (``store``, ``read``)."""
