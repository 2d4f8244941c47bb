from pptl.cli import main

main()
