"""The one check of an archive URL (DL_ARCHIVE_URL, `--archive`): here, below the settings and
the archive that both use it, so a bad URL is refused with the same line wherever it is given."""

from __future__ import annotations

from typing import Any


def open_archive_fs(url: str) -> tuple[Any, str]:
    """fsspec's filesystem and root path of `url`; ValueError with one line when fsspec does not
    know the protocol or its library is not installed (s3fs for s3://, gcsfs for gs://, ...)."""
    from fsspec.core import url_to_fs

    if not url or not url.strip():
        raise ValueError("must be a URL such as file:///var/lib/dl-archive or s3://bucket/prefix")
    try:
        fs, root = url_to_fs(url)
    except ImportError as exc:
        raise ValueError(f"{url!r}: {exc}") from None
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{url!r}: {exc} (e.g. file:///var/lib/dl-archive, s3://bucket/prefix, memory://x)") from None
    return fs, str(root).rstrip("/")


def check_archive_url(url: str | None) -> str | None:
    """`url` when fsspec can open it, None when unset; ValueError otherwise."""
    if url is None or url == "":
        return None
    open_archive_fs(url)
    return url
