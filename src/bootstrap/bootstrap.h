/* bootstrap.h: the bootstrap layer in one include: the rendezvous store, the out-of-band
 * collectives over it, the liveness mesh, and rank and node discovery. Above common/ only. */
#ifndef TUTTI_BOOTSTRAP_H
#define TUTTI_BOOTSTRAP_H

#include "discover.h"
#include "liveness.h"
#include "oob.h"
#include "store.h"

#endif /* TUTTI_BOOTSTRAP_H */
