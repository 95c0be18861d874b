from typhapki.entry import main

raise SystemExit(main())
