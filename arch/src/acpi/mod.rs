//! ACPI tables (being written).
