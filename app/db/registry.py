"""Imports every ORM model so ``Base.metadata`` is complete (Alembic and tests use it)."""

from app.audit import models as audit_models
from app.auth import models as auth_models
from app.budget import models as budget_models
from app.console import models as console_models
from app.datasets import models as dataset_models
from app.db.base import Base
from app.jobs import models as job_models
from app.samples import models as sample_models
from app.webhooks import models as webhook_models

__all__ = [
    "Base",
    "audit_models",
    "auth_models",
    "budget_models",
    "console_models",
    "dataset_models",
    "job_models",
    "sample_models",
    "webhook_models",
]
