from memlint.cli.main import main

raise SystemExit(main())
