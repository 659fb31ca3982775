from tprimat.cli import main

main()
