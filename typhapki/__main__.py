from typhapki.cli import main

raise SystemExit(main())
