"""compactrl_slime tests (see ../README.md)."""

import logging

# The convert hook warns once per step about masked rollouts; the random
# episodes here have many. Tests that check a log use assertLogs.
logging.getLogger("compactrl_slime").setLevel(logging.ERROR)
