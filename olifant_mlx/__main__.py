import sys

from olifant_mlx.cli import main

sys.exit(main())
