//! The PFC counter model (seed 000): counter epochs, wraps and intervals of the
//! pfcControlFrameTotalCount reading ([`counter`]).

pub mod counter;
