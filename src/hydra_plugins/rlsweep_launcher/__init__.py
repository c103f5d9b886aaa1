"""rlsweep's Hydra launcher plugin: ``submitit_local`` with a limit on jobs at once; seed-major order
for it and for Hydra's ``basic`` launcher.

Hydra instantiates launchers only from the ``hydra_plugins`` namespace package, hence this home;
the scheduling policy itself lives in :mod:`rlsweep.launchers`.
"""
