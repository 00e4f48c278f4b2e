from gpu_audit.cli import main

main()
