#ifndef __OUTPUT_H__
#define __OUTPUT_H__

#include <pmsis.h>

#endif
