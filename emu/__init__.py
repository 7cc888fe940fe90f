"""Pure numba kernels, by operation family. Importing the package first points numba's
on-disk kernel cache away from the package tree (kernel_cache.py says why)."""
from accelstub.emu.kernel_cache import use_user_cache_dir

use_user_cache_dir()
