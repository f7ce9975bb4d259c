"""Settings of the ERP flows, read from ``ERP_*`` environment variables.

Most tune how the ERP jobs split their work, not what they compute: a posting
job posts the same documents whatever its chunk size. The fiscal year decides
where the books start a year: its first period's trial balance opens with the
previous years' income and expense rolled into retained earnings (3100).
The ``flag_*`` settings decide whether each flag an accountant expects
(:mod:`flows.erp.flags`) only warns or refuses the close: ``warn`` or ``refuse``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["ErpSettings", "FlagAction"]

FlagAction = Literal["warn", "refuse"]
"""What a raised flag does: shown and passes (``warn``), or fails the check and the close."""


class ErpSettings(BaseSettings):
    """Every ERP setting; each is read from ``ERP_<NAME>`` (e.g. ``ERP_POSTING_CHUNK_SIZE``)."""

    model_config = SettingsConfigDict(env_prefix="ERP_", extra="ignore")

    posting_chunk_size: int = Field(
        default=500,
        ge=1,
        le=100_000,
        description="documents per posting step run (one transaction each)",
    )
    fiscal_year_start_month: int = Field(
        default=1,
        ge=1,
        le=12,
        description="month the fiscal year starts in (1 = the calendar year)",
    )
    flag_inventory_credit: FlagAction = Field(
        default="refuse",
        description="inventory (1300) in credit in a store or company-wide: warn or refuse",
    )
    flag_negative_average: FlagAction = Field(
        default="refuse",
        description="an average cost below zero (a negative COGS): warn or refuse",
    )
    flag_negative_stock: FlagAction = Field(
        default="warn",
        description="a store item that closed below zero quantity: warn or refuse",
    )
    flag_direct_cogs: FlagAction = Field(
        default="warn",
        description="lines on 5000/5100 not posted by costing (GL COGS != item costs)",
    )
    flag_empty_month: FlagAction = Field(
        default="warn",
        description="a period with no document and no activity: warn or refuse",
    )
    approve_rejects_over: int | None = Field(
        default=None,
        ge=0,
        description=(
            "a period's default limit of rejected documents without an accountant's approval "
            "(pinned on the period by its first posting; unset: no limit unless a submit names "
            "one)"
        ),
    )
