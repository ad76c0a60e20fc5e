import sys

if sys.argv[1:2] == ["ops"]:  # python -m bench ops: per-op overhead
    from .ops import main
    main(sys.argv[2:])
elif sys.argv[1:2] == ["report"]:  # python -m bench report: docs/benchmarks.md from bench/results/
    from .report import main
    main(sys.argv[2:])
else:
    from .run import main
    main()
