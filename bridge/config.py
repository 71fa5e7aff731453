"""Settings from a YAML file and the environment (``SLURMBRIDGE_<SECTION>__<FIELD>``).

pydantic-settings does the parsing and validation, so a typo in a value fails at
start-up with the setting's name instead of at the first pod.
"""

import os
from pathlib import Path
from typing import Final

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

CONFIG_FILE_ENV: Final = "SLURMBRIDGE_CONFIG_FILE"


class SlurmSettings(BaseModel):
    url: str = Field("http://127.0.0.1:6820", description="slurmrestd base URL")
    user: str = Field("slurm", description="Slurm user the JWT belongs to (X-SLURM-USER-NAME)")
    token: SecretStr | None = Field(None, description="JWT; prefer token_file for rotation")
    token_file: Path | None = Field(None, description="file holding the JWT, re-read on change")
    data_parser: str | None = Field(
        None, description="pin a data parser such as v0.0.41; default: newest both sides know"
    )
    timeout_seconds: float = Field(10.0, gt=0)
    retries: int = Field(3, ge=0, description="attempts after the first on transient failures")
    backoff_seconds: float = Field(0.2, ge=0, description="first retry delay, doubled each time")
    max_connections: int = Field(16, ge=1)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="SLURMBRIDGE_", env_nested_delimiter="__", extra="forbid"
    )

    slurm: SlurmSettings = SlurmSettings()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments beat the environment, which beats the YAML file (if one is named)."""
        path = os.environ.get(CONFIG_FILE_ENV)
        if not path:
            return (init_settings, env_settings)
        if not Path(path).is_file():
            raise ValueError(f"{CONFIG_FILE_ENV}={path}: no such file")
        return (init_settings, env_settings, YamlConfigSettingsSource(settings_cls, yaml_file=path))
