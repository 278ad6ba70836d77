"""Reports on configs and runs: peak numbers a preset implies, and their printed summaries."""
