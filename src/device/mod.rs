//! The device: opening it ([`context`]), the device-side objects the
//! front end's handles share ([`handles`]), and its async events ([`events`]).

pub(crate) mod context;
pub(crate) mod events;
pub(crate) mod handles;
