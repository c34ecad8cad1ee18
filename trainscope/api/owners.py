"""Which live process owns a folder or a socket: the ``.owner`` record (pid and start time), its
liveness, and the owner-only read of it. One implementation, the step hook's (it runs inside the
user's job, standard library only); the front ends (the MCP server's stale-folder sweep) reach it
here, through the application layer."""

from __future__ import annotations

from trainscope.collectors.step_hook import folder_entries
from trainscope.collectors.step_hook import owner_alive
from trainscope.collectors.step_hook import owner_gone
from trainscope.collectors.step_hook import owner_record
from trainscope.collectors.step_hook import process_alive
from trainscope.collectors.step_hook import read_own_file

__all__ = ["folder_entries", "owner_alive", "owner_gone", "owner_record", "process_alive", "read_own_file"]
