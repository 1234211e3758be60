"""A console user's rules, shared by every face (Python, HTTP, CLI, console): what a name may look
like, which roles there are, how long a password must be. A face reads its input through these
functions, so a name the CLI refuses is the name HTTP answers 422 for, with the same words."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from dataloader.exceptions import ValidationFailed
from dataloader.model.principal import Role

# Lower case so that "Alice" and "alice" cannot be two people; `@` and `.` so an e-mail address
# (what a single sign-on provider names people by) fits as it is.
NAME_PATTERN = r"^[a-z0-9][a-z0-9._@-]{0,63}$"
_NAME = re.compile(NAME_PATTERN)
# NIST SP 800-63B asks for at least 8; a shared operator console warrants more. The upper bound
# keeps a hash's input (and its cost) bounded: argon2 reads all of it.
PASSWORD_MIN_LENGTH = 12
PASSWORD_MAX_LENGTH = 1024
ROLES = tuple(role.value for role in Role)


@dataclass(frozen=True, slots=True)
class User:
    """A user as every face shows it: never the password's hash."""

    name: str
    role: Role
    disabled: bool
    created_at: datetime
    last_login_at: datetime | None


def user_name(value: object, field: str = "name") -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ValidationFailed(
            f"{field}: a user name is 1 to 64 characters of a-z, 0-9, '.', '_', '@', '-', starting with a letter "
            f"or digit (lower case)", [{"loc": [field], "msg": "not a user name", "type": "value_error"}])
    return value


def role(value: object, field: str = "role") -> Role:
    try:
        return Role(value)
    except ValueError:
        raise ValidationFailed(f"{field}: must be one of {', '.join(ROLES)}",
                               [{"loc": [field], "msg": f"must be one of {', '.join(ROLES)}",
                                 "type": "enum"}]) from None


def password(value: object, field: str = "password") -> str:
    """The password as given (never echoed in the error: the message says only what is wrong)."""
    if not isinstance(value, str):
        problem = "must be text"
    elif len(value) < PASSWORD_MIN_LENGTH:
        problem = f"must be at least {PASSWORD_MIN_LENGTH} characters"
    elif len(value) > PASSWORD_MAX_LENGTH:
        problem = f"must be at most {PASSWORD_MAX_LENGTH} characters"
    elif "\x00" in value:
        problem = "must not contain NUL characters"
    else:
        return value
    raise ValidationFailed(f"{field}: {problem}", [{"loc": [field], "msg": problem, "type": "value_error"}])
