"""The Agent Master API on aiohttp: request parameters checked against the OpenAPI document,
the answers as generated models, admission of connections."""
