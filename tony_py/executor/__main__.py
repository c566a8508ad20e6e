from tony_py.executor.main import main

main()
