"""The base of every settings section (bridge/config.py, bridge/tls_settings.py)."""

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A part of the settings: an unknown key is a typo, refused at start, never a default."""

    model_config = ConfigDict(extra="forbid")
