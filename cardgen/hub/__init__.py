"""Publishing to the Hugging Face Hub: a card into a model repo (as a pull request by default), a raw run into
a dataset repo, and runs back from a dataset repo for the site.

    plan.py    what a push uploads (pure; ``--dry-run`` prints it)
    client.py  the only module that imports huggingface_hub; errors become one CardgenError line
"""

from __future__ import annotations

from cardgen.hub.client import downloaded_runs, push_plan
from cardgen.hub.plan import PushPlan, Upload, card_plan, dataset_plan, format_plan

__all__ = ["PushPlan", "Upload", "card_plan", "dataset_plan", "downloaded_runs", "format_plan", "push_plan"]
