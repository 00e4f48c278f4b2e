from gpu_audit.cli import run

run()
