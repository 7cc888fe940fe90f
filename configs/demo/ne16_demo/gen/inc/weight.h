#ifndef __WEIGHT_H__
#define __WEIGHT_H__

#include <pmsis.h>

#endif
