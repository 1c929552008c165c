//! mlx5dv control path (in progress).
