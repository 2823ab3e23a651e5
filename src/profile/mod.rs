//! Launch profiles: YAML files for one-command demos, bundled and user-supplied, validated with
//! errors that name the file, line and field.
