//! Legacy PC devices and the ACPI platform devices.

mod acpi_pm;
mod ged;
mod i8042;
mod serial;

pub use acpi_pm::{AcpiPmDevice, PowerEvent};
pub use ged::GedDevice;
pub use i8042::I8042;
pub use serial::SerialDevice;
