"""``python -m cselab.cli`` (e.g. under ``accelerate launch``)."""

import sys

from cselab.cli import main

sys.exit(main())
