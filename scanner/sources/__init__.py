"""Where snapshots come from: files and directories here, the live API in its own module."""
