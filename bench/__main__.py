import sys

if sys.argv[1:2] == ["ops"]:  # python -m bench ops: per-op overhead
    from .ops import main
    main(sys.argv[2:])
else:
    from .run import main
    main()
