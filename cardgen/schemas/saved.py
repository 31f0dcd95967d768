"""The base of every saved model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Saved(BaseModel):
    """A model cardgen writes to disk and reads back. Unknown fields are ignored, so a file written by a newer
    cardgen that only added fields still loads; an incompatible change bumps the file's ``schema_version``, which
    :class:`cardgen.rundir.RunDir` checks before validating."""

    model_config = ConfigDict(extra="ignore")
