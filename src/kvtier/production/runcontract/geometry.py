"""The run contract's geometry check: the pool and the server's blocks, as every source states them.

The check lives with the geometry's derivation in kvtier.records.geometry; this is its old name.
"""

from ...records.geometry import GIB, _agree, _connector_of_command, _line_with, _server_block, _where, check_geometry

__all__ = ["GIB", "_agree", "_connector_of_command", "_line_with", "_server_block", "_where", "check_geometry"]
