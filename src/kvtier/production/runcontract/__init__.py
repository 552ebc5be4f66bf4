"""Old import path of the run contract: kvtier.records.runcontract (the checks run in the readers)."""

from ...records.runcontract import *  # noqa: F401,F403
from ...records.runcontract import __all__  # noqa: F401
