"""API v1 users (docs/security.md): create, list, read, set the role or the password, disable,
enable, delete the console's users. Every route needs Action.MANAGE_ACCESS (an admin; model/http_actions.py,
checked by api/access.py). Errors have the one shape (`{error, detail}`); bad input is a 422 that writes
nothing, checked by the model's rules (model/user.py) as every face checks it; a password is
never echoed or logged. The rules are `dataloader.users.manager.UserManager`'s."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Response, status
from pydantic import BaseModel, ConfigDict, Field

from dataloader.api.runtime import Runtime, get_runtime, require_token
from dataloader.api.v1.exceptions import error_responses
from dataloader.api.v1.models import ErrorCode
from dataloader.api.v1.utils import location
from dataloader.model.principal import Role
from dataloader.model.user import NAME_PATTERN, PASSWORD_MAX_LENGTH, PASSWORD_MIN_LENGTH, User
from dataloader.users.manager import UserManager

router = APIRouter(prefix="/api/v1/users", tags=["users"], dependencies=[Depends(require_token)])


async def get_user_manager(runtime: Runtime = Depends(get_runtime)) -> UserManager:
    return runtime.require_app().users


Api = Annotated[UserManager, Depends(get_user_manager)]
# The path's shape is documented; the manager checks it (model/user.py) as every face does.
Name = Annotated[str, Path(max_length=64, description="The user's name", examples=["alice"])]
# Documented bounds only: the rules' own check answers 422 with the same words on every face.
Password = Annotated[str, Field(description=f"At least {PASSWORD_MIN_LENGTH} characters, at most "
                                            f"{PASSWORD_MAX_LENGTH}; stored as an argon2id hash, never echoed",
                                json_schema_extra={"minLength": PASSWORD_MIN_LENGTH, "maxLength": PASSWORD_MAX_LENGTH,
                                                   "format": "password", "writeOnly": True})]
ERRORS = (ErrorCode.forbidden,)


class UserCreateRequest(BaseModel):
    """The body of `POST /api/v1/users`. Unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"name": "alice", "password": "correct horse battery", "role": "operator"}]})
    name: str = Field(description="1 to 64 characters of a-z, 0-9, '.', '_', '@', '-'",
                      json_schema_extra={"pattern": NAME_PATTERN})
    password: Password
    role: str = Field(default=Role.VIEWER.value, description="viewer, operator or admin",
                      json_schema_extra={"enum": [r.value for r in Role]})


class RoleRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"role": "viewer"}]})
    role: str = Field(description="viewer, operator or admin", json_schema_extra={"enum": [r.value for r in Role]})


class PasswordRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    password: Password


class UserResponse(BaseModel):
    name: str
    role: Role
    disabled: bool = Field(description="A disabled user may not sign in; their sessions were ended")
    created_at: datetime
    last_login_at: datetime | None = Field(description="Their last sign-in to the console (null: never)")


class UserListResponse(BaseModel):
    users: list[UserResponse]


def _view(user: User) -> UserResponse:
    return UserResponse(name=user.name, role=user.role, disabled=user.disabled, created_at=user.created_at,
                        last_login_at=user.last_login_at)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=UserResponse, summary="Create a user",

             responses=error_responses(*ERRORS, ErrorCode.invalid_json, ErrorCode.unsupported_media_type,
                                       ErrorCode.user_exists))
async def create_user(body: UserCreateRequest, response: Response, api: Api) -> UserResponse:
    """409 `user_exists` when the name is taken (a disabled user's too)."""
    user = await api.create(body.name, body.password, body.role)
    response.headers["Location"] = location("api", "v1", "users", user.name)
    return _view(user)


@router.get("", response_model=UserListResponse, summary="List users by name",
            responses=error_responses(*ERRORS))
async def list_users(api: Api) -> UserListResponse:
    return UserListResponse(users=[_view(u) for u in await api.list()])


@router.get("/{name}", response_model=UserResponse, summary="One user",
            responses=error_responses(*ERRORS, ErrorCode.user_not_found))
async def get_user(name: Name, api: Api) -> UserResponse:
    return _view(await api.get(name))


@router.put("/{name}/role", response_model=UserResponse, summary="Set a user's role",
            responses=error_responses(*ERRORS, ErrorCode.invalid_json, ErrorCode.unsupported_media_type,
                                      ErrorCode.user_not_found, ErrorCode.last_admin))
async def set_role(name: Name, body: RoleRequest, api: Api) -> UserResponse:
    """Holds from the user's next request. 409 `last_admin` for the last enabled admin."""
    return _view(await api.set_role(name, body.role))


@router.put("/{name}/password", response_model=UserResponse, summary="Set a user's password",

            responses=error_responses(*ERRORS, ErrorCode.invalid_json, ErrorCode.unsupported_media_type,
                                      ErrorCode.user_not_found))
async def set_password(name: Name, body: PasswordRequest, api: Api) -> UserResponse:
    """Every console session of the user ends: they sign in again with the new password."""
    return _view(await api.set_password(name, body.password))


@router.post("/{name}/disable", response_model=UserResponse, summary="Disable a user",
             responses=error_responses(*ERRORS, ErrorCode.user_not_found, ErrorCode.last_admin))
async def disable_user(name: Name, api: Api) -> UserResponse:
    """They may not sign in, and every session of theirs ends now; the name stays taken. Idempotent."""
    return _view(await api.disable(name))


@router.post("/{name}/enable", response_model=UserResponse, summary="Enable a user",
             responses=error_responses(*ERRORS, ErrorCode.user_not_found))
async def enable_user(name: Name, api: Api) -> UserResponse:
    return _view(await api.enable(name))


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT, response_class=Response, summary="Delete a user",

               responses=error_responses(*ERRORS, ErrorCode.user_not_found, ErrorCode.last_admin))
async def delete_user(name: Name, api: Api) -> Response:
    """The user and every session of theirs. 409 `last_admin` for the last enabled admin."""
    await api.delete(name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
