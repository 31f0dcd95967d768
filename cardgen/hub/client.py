"""The only module that talks to the Hugging Face Hub (huggingface_hub, imported here and nowhere else).

The endpoint is ``HF_ENDPOINT`` when set (read at call time, so tests can point the real client at a local
server), the token ``HF_TOKEN`` or the stored login. The token is handed to the client and never printed,
logged or written. Every failure becomes one :class:`~cardgen.errors.CardgenError` line.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from cardgen.errors import CardgenError
from cardgen.hub.plan import DATASET_ROOT, PushPlan

DEFAULT_ENDPOINT = "https://huggingface.co"


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Network failures of whichever HTTP library this huggingface_hub uses."""
    errors: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for module, names in (
        ("httpx2", ("TransportError",)),
        ("httpx", ("TransportError",)),
        ("requests", ("ConnectionError", "Timeout")),
    ):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        errors += [getattr(mod, n) for n in names if isinstance(getattr(mod, n, None), type)]
    return tuple(errors)


def hub_error(exc: BaseException, *, repo_id: str, repo_type: str, action: str) -> CardgenError:
    """One line saying what went wrong, with no token, header or stack in it."""
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled  # noqa: PLC0415  huggingface_hub takes about a second to import: only a push or a download needs it

    where = endpoint()
    cause = exc.__cause__ if isinstance(exc, LocalEntryNotFoundError) and exc.__cause__ else exc
    if isinstance(cause, OfflineModeIsEnabled):
        return CardgenError(f"cannot {action}: HF_HUB_OFFLINE is set; unset it to reach the Hub")
    if isinstance(cause, HfHubHTTPError) and cause.response is not None:
        status = cause.response.status_code
        message = cause.response.headers.get("X-Error-Message", "")
        if status == 401 and "credentials" in message.lower():
            return CardgenError(
                f"cannot {action}: the Hub at {where} refused the token (HTTP 401); check HF_TOKEN "
                "or run 'hf auth login'"
            )
        if status in (401, 404):
            return CardgenError(
                f"cannot {action}: {repo_type} repo {repo_id} not found at {where} (HTTP {status}); "
                "check the name, create the repo, or use a token that can see it"
            )
        if status == 403:
            return CardgenError(
                f"cannot {action}: the token may not write to {repo_type} repo {repo_id} "
                "(HTTP 403); use a token with write access"
            )
        return CardgenError(f"cannot {action}: the Hub at {where} answered HTTP {status}")
    if isinstance(cause, _transport_errors()) or isinstance(exc, LocalEntryNotFoundError):
        return CardgenError(f"cannot {action}: the Hub at {where} is unreachable ({type(cause).__name__})")
    return CardgenError(f"cannot {action}: {type(exc).__name__}")


def _token(required: bool) -> str | None:
    from huggingface_hub import get_token  # noqa: PLC0415  huggingface_hub takes about a second to import: only a push or a download needs it

    token = get_token()
    if required and not token:
        raise CardgenError("no Hugging Face token: set HF_TOKEN or run 'hf auth login'")
    return token


def push_plan(plan: PushPlan) -> str:
    """Send the plan as one commit (a pull request unless ``create_pr`` is false); return its URL."""
    from huggingface_hub import CommitOperationAdd, HfApi  # noqa: PLC0415  huggingface_hub takes about a second to import: only a push or a download needs it

    api = HfApi(endpoint=endpoint(), token=_token(required=True))
    action = f"push to {plan.repo_type} repo {plan.repo_id}"
    try:
        api.repo_info(
            plan.repo_id, repo_type=plan.repo_type
        )  # fails fast, without retries, on 401/404/network
        info = api.create_commit(
            repo_id=plan.repo_id,
            repo_type=plan.repo_type,
            commit_message=plan.commit_message,
            create_pr=plan.create_pr,
            operations=[
                CommitOperationAdd(path_in_repo=u.path_in_repo,
                                   path_or_fileobj=u.data if u.data is not None else str(u.local_path))
                for u in plan.uploads
            ],
        )
    except Exception as exc:  # translated into one line at the edge
        raise hub_error(exc, repo_id=plan.repo_id, repo_type=plan.repo_type, action=action) from None
    return str(info.pr_url or info.commit_url)


@contextlib.contextmanager
def downloaded_runs(repo_id: str) -> Iterator[Path]:
    """Download the runs of a dataset repo into a temporary folder, yield the folder of runs, then delete it.

    A fresh folder each time, so a Hub that cannot be reached is an error rather than a stale cached copy.
    """
    from huggingface_hub import snapshot_download  # noqa: PLC0415  huggingface_hub takes about a second to import: only a push or a download needs it

    with tempfile.TemporaryDirectory(prefix="cardgen-hub-") as tmp:
        try:
            path = snapshot_download(
                repo_id,
                repo_type="dataset",
                local_dir=tmp,
                endpoint=endpoint(),
                token=_token(required=False),
                allow_patterns=[f"{DATASET_ROOT}/**"],
            )
        except Exception as exc:  # translated into one line at the edge
            raise hub_error(
                exc, repo_id=repo_id, repo_type="dataset", action=f"download runs from {repo_id}"
            ) from None
        runs = Path(path) / DATASET_ROOT
        if not runs.is_dir():
            raise CardgenError(
                f"dataset repo {repo_id} holds no runs (nothing under {DATASET_ROOT}/): push one with "
                f"'cardgen push RUN_DIR --dataset {repo_id}'"
            )
        yield runs
