"""CompactionRL in verl: the ``compactrl`` agent loop and the ``compactrl`` v1 trainer.

Importing the package registers both with verl; verl imports it itself
through the ``verl.plugins`` entry point of this distribution (or
VERL_USE_EXTERNAL_MODULES=compactrl_verl). See the README for the settings.
"""

from . import agent_loop, settings, trainer  # noqa: F401  (registration)

__all__ = ["agent_loop", "settings", "trainer"]
