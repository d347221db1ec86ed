//! dsh
