"""The formats of a record's key and value that process decodes before the transform sees
them: the Confluent wire format of Avro and Protobuf records whose schemas live in a schema
registry (confluent_wire)."""
