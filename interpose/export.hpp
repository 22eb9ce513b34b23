// interpose/export.hpp: SHUNT_EXPORT marks the interposed symbols, the only ones libshunt.so exports.
#pragma once

/// Default visibility for one interposed function; everything else is built hidden
/// (-fvisibility=hidden) and the version script libshunt.map exports only MPI_* names.
#define SHUNT_EXPORT __attribute__((visibility("default")))
