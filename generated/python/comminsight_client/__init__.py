
""" A client library for accessing CommInsight Agent Master API """
from .client import AuthenticatedClient, Client

__all__ = (
    "AuthenticatedClient",
    "Client",
)
