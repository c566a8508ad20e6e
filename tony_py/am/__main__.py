from tony_py.am.main import main

main()
