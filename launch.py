"""Run one benchmark (or a sweep with -m): python launch.py [group=option ...] [key=value ...]."""

from tprimat.launch import main

if __name__ == "__main__":
    main()
