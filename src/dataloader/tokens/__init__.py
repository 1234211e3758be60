"""API tokens for machines (docs/security.md "Tokens and scopes"): create, list, revoke, and the
cached look-up the HTTP API's guard makes for every request that carries one (manager.py)."""

from dataloader.model.api_token import ApiToken, CreatedToken, TokenSpec

__all__ = ["ApiToken", "CreatedToken", "TokenSpec"]
